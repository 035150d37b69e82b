//! Contract v1: what loads, what is refused, and that no error ever repeats a value.

use corral_learn::manifest::{self, IssueKind, Manifest, Value};
use corral_policy::codes;
use serde_json::{Value as J, json};

pub fn good() -> J {
    json!({
        "schema_version": 1,
        "scenario_id": "kafka-lag-7f3a",
        "seeded_at": "2026-10-30T10:00:00Z",
        "default_disclosure": 0,
        "targets": [
            {"id": "total_lag", "descriptor": "total lag of group orders-processor",
             "value": 5100, "unit": "messages"},
            {"id": "bad_partition", "descriptor": "name of the stuck partition",
             "value": "orders-7"}
        ]
    })
}

fn parse(j: &J) -> Result<Manifest, manifest::ManifestError> {
    manifest::parse(j.to_string().as_bytes())
}

fn refused(j: &J) -> Vec<(String, IssueKind)> {
    match parse(j) {
        Ok(_) => panic!("accepted: {j}"),
        Err(e) => e.issues.into_iter().map(|i| (i.path, i.kind)).collect(),
    }
}

fn with(path: &[&str], v: J) -> J {
    let mut j = good();
    let mut cur = &mut j;
    for (i, p) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        if let Ok(n) = p.parse::<usize>() {
            if last {
                cur[n] = v.clone();
            }
            cur = &mut cur[n];
        } else if last {
            cur[*p] = v.clone();
            break;
        } else {
            cur = &mut cur[*p];
        }
    }
    j
}

fn without(path: &[&str]) -> J {
    let mut j = good();
    let (last, parents) = path.split_last().unwrap();
    let mut cur = &mut j;
    for p in parents {
        cur = match p.parse::<usize>() {
            Ok(n) => &mut cur[n],
            Err(_) => &mut cur[*p],
        };
    }
    cur.as_object_mut().unwrap().remove(*last);
    j
}

#[test]
fn the_specs_example_loads_with_its_fields() {
    let m = parse(&good()).unwrap();
    assert_eq!(m.scenario_id, "kafka-lag-7f3a");
    assert_eq!(m.default_disclosure, 0);
    assert_eq!(m.targets.len(), 2);
    assert_eq!(m.targets[0].value, Value::Integer(5100));
    assert_eq!(m.targets[0].unit.as_deref(), Some("messages"));
    assert_eq!(m.targets[1].value, Value::Text("orders-7".into()));
    assert_eq!(m.seeded_at.unix_timestamp(), 1_793_354_400);
}

#[test]
fn an_unknown_field_is_refused_at_its_path() {
    assert_eq!(
        refused(&with(&["defualt_disclosure"], json!(1))),
        vec![("defualt_disclosure".into(), IssueKind::Unknown)]
    );
    assert_eq!(
        refused(&with(&["targets", "0", "hide"], json!(true))),
        vec![("targets[0].hide".into(), IssueKind::Unknown)]
    );
}

#[test]
fn another_schema_version_is_refused() {
    for v in [json!(2), json!(0)] {
        assert_eq!(
            refused(&with(&["schema_version"], v)),
            vec![("schema_version".into(), IssueKind::UnsupportedVersion)]
        );
    }
}

#[test]
fn json_types_are_exact() {
    let cases = [
        (with(&["schema_version"], json!(true)), "schema_version"),
        (with(&["schema_version"], json!("1")), "schema_version"),
        (with(&["schema_version"], json!(1.0)), "schema_version"),
        (
            with(&["default_disclosure"], json!("2")),
            "default_disclosure",
        ),
        (
            with(&["default_disclosure"], json!(true)),
            "default_disclosure",
        ),
        (
            with(&["targets", "0", "value"], json!(true)),
            "targets[0].value",
        ),
        (
            with(&["targets", "0", "value"], json!(null)),
            "targets[0].value",
        ),
        (
            with(&["targets", "0", "value"], json!([5100])),
            "targets[0].value",
        ),
        (
            with(&["targets", "0", "unit"], json!(null)),
            "targets[0].unit",
        ),
        (with(&["scenario_id"], json!(7)), "scenario_id"),
        (with(&["targets"], json!({})), "targets"),
    ];
    for (doc, path) in cases {
        let issues = refused(&doc);
        assert!(
            matches!(issues.as_slice(), [(p, IssueKind::WrongType { .. })] if p == path),
            "{path}: {issues:?}"
        );
    }
}

#[test]
fn required_fields_are_named_when_missing() {
    for path in [
        &["schema_version"][..],
        &["scenario_id"],
        &["seeded_at"],
        &["targets"],
        &["targets", "0", "id"],
        &["targets", "0", "descriptor"],
        &["targets", "0", "value"],
    ] {
        let issues = refused(&without(path));
        let want = path
            .iter()
            .map(|p| match p.parse::<usize>() {
                Ok(_) => String::new(),
                Err(_) => (*p).to_owned(),
            })
            .collect::<Vec<_>>()
            .join(".")
            .replace("targets..", "targets[0].");
        assert_eq!(issues, vec![(want, IssueKind::Missing)]);
    }
}

#[test]
fn default_disclosure_is_optional_and_reads_as_zero() {
    let m = parse(&without(&["default_disclosure"])).unwrap();
    assert_eq!(m.default_disclosure, 0);
}

#[test]
fn default_disclosure_three_and_empty_targets_are_refused() {
    assert!(matches!(
        refused(&with(&["default_disclosure"], json!(3))).as_slice(),
        [(p, IssueKind::OutOfRange(_))] if p == "default_disclosure"
    ));
    assert!(matches!(
        refused(&with(&["default_disclosure"], json!(-1))).as_slice(),
        [(p, IssueKind::OutOfRange(_))] if p == "default_disclosure"
    ));
    assert_eq!(
        refused(&with(&["targets"], json!([]))),
        vec![("targets".into(), IssueKind::NoTargets)]
    );
}

#[test]
fn seeded_at_must_carry_a_time_zone() {
    for bad in [
        "2026-10-30T10:00:00",
        "2026-10-30",
        "yesterday",
        "2026-10-30T10:00:00+0200",
    ] {
        assert_eq!(
            refused(&with(&["seeded_at"], json!(bad))),
            vec![("seeded_at".into(), IssueKind::NotTimestamp)],
            "{bad}"
        );
    }
    let m = parse(&with(&["seeded_at"], json!("2026-10-30T12:00:00+02:00"))).unwrap();
    assert_eq!(m.seeded_at.unix_timestamp(), 1_793_354_400);
}

#[test]
fn short_and_small_values_are_refused() {
    for (v, kind) in [
        (json!(3), IssueKind::NumberTooSmall),
        (json!(-99), IssueKind::NumberTooSmall),
        (json!(99.5), IssueKind::NumberTooSmall),
        (json!("abc"), IssueKind::StringTooShort),
        (json!("  ab  "), IssueKind::StringTooShort),
        (
            json!("ab\u{200b}\u{200b}\u{feff}"),
            IssueKind::StringTooShort,
        ),
    ] {
        assert_eq!(
            refused(&with(&["targets", "0", "value"], v.clone())),
            vec![("targets[0].value".into(), kind)],
            "{v}"
        );
    }
    let m = parse(&with(&["targets", "0", "value"], json!(-100))).unwrap();
    assert_eq!(m.targets[0].value, Value::Integer(-100));
}

#[test]
fn numbers_must_be_below_two_to_the_53() {
    for v in [
        json!(9_007_199_254_740_992u64),
        json!(-9_007_199_254_740_992i64),
        json!(1e300),
    ] {
        assert_eq!(
            refused(&with(&["targets", "0", "value"], v.clone())),
            vec![("targets[0].value".into(), IssueKind::Unsafe)],
            "{v}"
        );
    }
    let m = parse(&with(
        &["targets", "0", "value"],
        json!(9_007_199_254_740_991u64),
    ))
    .unwrap();
    assert_eq!(m.targets[0].value, Value::Integer(9_007_199_254_740_991));
}

#[test]
fn nan_infinity_and_numbers_beyond_f64_are_syntax_errors() {
    let base = good().to_string();
    for bad in ["NaN", "Infinity", "-Infinity", "1e400"] {
        let doc = base.replace("5100", bad);
        let err = manifest::parse(doc.as_bytes()).unwrap_err();
        assert!(
            matches!(err.issues[0].kind, IssueKind::Syntax { .. }),
            "{bad}: {err}"
        );
        assert_eq!(err.code(), codes::LEARNING_MANIFEST_SYNTAX);
    }
}

#[test]
fn an_integral_float_is_an_integer_and_a_fraction_a_decimal() {
    let m = parse(&with(&["targets", "0", "value"], json!(5100.0))).unwrap();
    assert_eq!(m.targets[0].value, Value::Integer(5100));
    let m = parse(&with(&["targets", "0", "value"], json!(5100.25))).unwrap();
    assert_eq!(m.targets[0].value, Value::Decimal(5100.25));
}

#[test]
fn a_duplicate_key_or_target_id_is_refused() {
    let doc = good().to_string().replacen(
        "\"schema_version\":1",
        "\"schema_version\":1,\"schema_version\":1",
        1,
    );
    let err = manifest::parse(doc.as_bytes()).unwrap_err();
    assert!(
        matches!(err.issues[0].kind, IssueKind::Syntax { .. }),
        "{err}"
    );
    assert_eq!(
        refused(&with(&["targets", "1", "id"], json!("total_lag"))),
        vec![("targets[1].id".into(), IssueKind::DuplicateId)]
    );
}

#[test]
fn ids_are_plain_names() {
    for bad in ["", "has space", "a/b", "x\n"] {
        assert_eq!(
            refused(&with(&["scenario_id"], json!(bad))),
            vec![("scenario_id".into(), IssueKind::BadId)],
            "{bad:?}"
        );
    }
}

#[test]
fn a_value_inside_a_descriptor_id_unit_or_scenario_id_is_refused() {
    let cases = [
        (
            &["targets", "0", "descriptor"][..],
            json!("lag, now 5,100 messages"),
            "targets[0].descriptor",
        ),
        (
            &["targets", "1", "descriptor"],
            json!("lag of five thousand one hundred"),
            "targets[1].descriptor",
        ),
        (
            &["targets", "1", "unit"],
            json!("ORDERS-7 units"),
            "targets[1].unit",
        ),
        (
            &["targets", "1", "id"],
            json!("x-orders-7"),
            "targets[1].id",
        ),
        (&["scenario_id"], json!("lab-5100"), "scenario_id"),
    ];
    for (path, v, field) in cases {
        let err = parse(&with(path, v)).unwrap_err();
        assert!(
            err.issues
                .iter()
                .any(|i| i.kind == IssueKind::ValueExposed(field.into())),
            "{field}: {err}"
        );
        assert_eq!(err.code(), codes::LEARNING_MANIFEST_VALUE_EXPOSED);
    }
}

#[test]
fn no_error_repeats_a_value() {
    // Distinctive values, then every way of breaking the document around them.
    let secret_n = 987_654_321i64;
    let secret_s = "zebra-quokka";
    let mut base = good();
    base["targets"][0]["value"] = json!(secret_n);
    base["targets"][1]["value"] = json!(secret_s);
    let mut docs: Vec<String> = Vec::new();
    let mut push = |j: J| docs.push(j.to_string());
    let mut b = base.clone();
    b["targets"][0]["descriptor"] = json!(format!("lag {secret_n}"));
    push(b);
    let mut b = base.clone();
    b["targets"][1]["descriptor"] = json!(format!("the {secret_s} one"));
    push(b);
    let mut b = base.clone();
    b["targets"][1][secret_s] = json!(1);
    push(b);
    let mut b = base.clone();
    b["zebra_quokka"] = json!(1);
    b["targets"][1]["value"] = json!("zebra_quokka");
    push(b);
    let mut b = base.clone();
    b["schema_version"] = json!(secret_s);
    push(b);
    let mut b = base.clone();
    b["default_disclosure"] = json!(secret_n);
    push(b);
    let mut b = base.clone();
    b["seeded_at"] = json!(secret_s);
    push(b);
    let mut b = base.clone();
    b["scenario_id"] = json!(format!("{secret_s} x"));
    push(b);
    let mut b = base.clone();
    b["targets"][0]["unit"] = json!(secret_n);
    push(b);
    let mut b = base.clone();
    b["targets"][0]["id"] = json!(secret_s);
    b["targets"][1]["id"] = json!(secret_s);
    push(b);
    docs.push(
        base.to_string()
            .replace("987654321", "987654321 zebra-quokka"),
    );
    docs.push(base.to_string().replace(secret_s, "zebra-quokka\u{1}"));
    docs.push(format!("{}{secret_s}", base));
    for doc in &docs {
        let err = manifest::parse(doc.as_bytes()).unwrap_err();
        let shown = format!("{err} {err:?}");
        for needle in ["987654321", "987,654,321", "zebra", "quokka"] {
            assert!(!shown.contains(needle), "{needle} in: {shown}");
        }
    }
}

#[test]
fn every_error_names_its_code_and_a_fix() {
    let err = parse(&with(&["targets", "0", "value"], json!(3))).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with(
            "error[learning.manifest_schema]: `targets[0].value` must be at least 100"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("see: docs/errors.md#learning.manifest_schema"),
        "{shown}"
    );
}

#[test]
fn a_directory_a_fifo_and_a_missing_file_are_refused_and_a_symlink_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let err = manifest::read_file(dir.path()).unwrap_err();
    assert_eq!(err.issues[0].kind, IssueKind::NotRegularFile);
    let missing = dir.path().join("none.json");
    let err = manifest::read_file(&missing).unwrap_err();
    assert_eq!(err.code(), codes::LEARNING_MANIFEST_UNREADABLE);

    let fifo = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let err = manifest::read_file(&fifo).unwrap_err();
    assert_eq!(err.issues[0].kind, IssueKind::NotRegularFile);

    let real = dir.path().join("real.json");
    std::fs::write(&real, good().to_string()).unwrap();
    let link = dir.path().join("manifest.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let (m, _) = manifest::read_file(&link).unwrap();
    assert_eq!(m.scenario_id, "kafka-lag-7f3a");

    let fifo_link = dir.path().join("fifo-link");
    std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
    let err = manifest::read_file(&fifo_link).unwrap_err();
    assert_eq!(err.issues[0].kind, IssueKind::NotRegularFile);
}

#[test]
fn a_file_over_one_mebibyte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.json");
    let mut doc = good();
    doc["targets"][0]["descriptor"] = json!("x".repeat(1024 * 1024));
    std::fs::write(&big, doc.to_string()).unwrap();
    let err = manifest::read_file(&big).unwrap_err();
    assert_eq!(err.issues[0].kind, IssueKind::TooLarge);
}

#[test]
fn debug_output_of_a_manifest_withholds_its_values() {
    let m = parse(&good()).unwrap();
    let shown = format!("{m:?}");
    assert!(
        !shown.contains("5100") && !shown.contains("orders-7"),
        "{shown}"
    );
    assert!(shown.contains("<withheld>"));
}
