//! Synthetic inputs: spec 003's worked example, defaults, substitutions and limits (each
//! oversized request rejected whole).

use corral_lab::synthetic::{self, Request, SyntheticError};

fn request(subject: Option<&str>, count: Option<u64>, seed: Option<&str>) -> Request {
    Request {
        subject_kind: subject.map(str::to_owned),
        count,
        seed: seed.map(str::to_owned),
    }
}

#[test]
fn the_worked_example_gives_exactly_its_two_inputs_with_keys() {
    // Spec 003's body, as the endpoint takes it.
    let req: Request = serde_json::from_str(
        r#"{"subject_kind":"agent","count":2,"seed":"{{subject_kind}}:user{{index}}@example.test"}"#,
    )
    .unwrap();
    let batch = synthetic::generate(&req).unwrap();
    assert_eq!(
        serde_json::to_value(&batch).unwrap(),
        serde_json::json!({"samples": [
            {"key": "sample-1", "input": "agent:user1@example.test"},
            {"key": "sample-2", "input": "agent:user2@example.test"},
        ]})
    );
    assert_eq!(
        batch.steps(),
        serde_json::json!([
            {"input": "agent:user1@example.test"},
            {"input": "agent:user2@example.test"},
        ])
    );
}

#[test]
fn an_empty_request_takes_the_default_subject_count_and_template() {
    let batch = synthetic::generate(&Request::default()).unwrap();
    let inputs: Vec<&str> = batch.inputs().collect();
    assert_eq!(inputs.len(), 10);
    assert_eq!(inputs[0], "agent-sample-1");
    assert_eq!(inputs[9], "agent-sample-10");
    assert_eq!(batch.samples[9].key, "sample-10");
}

#[test]
fn only_index_and_subject_kind_are_substituted_and_newlines_are_kept() {
    let seed = "{{subject_kind}}\n{{ index }} {{input}} {{{index}}} {index}\r\n{{subject_kind}}{{index}}\n";
    let batch = synthetic::generate(&request(Some("bot{{index}}"), Some(3), Some(seed))).unwrap();
    assert_eq!(
        batch.samples[2].input,
        // The subject kind is not scanned again: its `{{index}}` stays literal.
        "bot{{index}}\n{{ index }} {{input}} {3} {index}\r\nbot{{index}}3\n"
    );
}

#[test]
fn a_template_read_from_a_seed_file_keeps_its_bytes() {
    let t =
        synthetic::template_from_bytes(b"{{subject_kind}}:user{{index}}@example.test\n").unwrap();
    let batch = synthetic::generate(&request(None, Some(1), Some(&t))).unwrap();
    assert_eq!(batch.samples[0].input, "agent:user1@example.test\n");
}

#[test]
fn a_seed_file_that_is_not_utf8_is_refused_with_its_offset() {
    let err = synthetic::template_from_bytes(b"ok\xff").unwrap_err();
    assert_eq!(err, SyntheticError::TemplateNotUtf8 { offset: 2 });
    assert_eq!(err.code(), "lab.synthetic_template_not_text");
}

/// Asserts a request is refused with `code`, and that its message says what, where and how.
fn refused(req: &Request, code: &str, mentions: &[&str]) -> SyntheticError {
    let err = synthetic::generate(req).unwrap_err();
    assert_eq!(err.code(), code, "{err}");
    assert!(
        corral_policy::codes::lookup(code).is_some(),
        "{code} is in the catalog"
    );
    let msg = err.to_string();
    for m in mentions {
        assert!(msg.contains(m), "`{msg}` mentions `{m}`");
    }
    err
}

#[test]
fn count_101_is_rejected_whole_and_100_is_accepted() {
    refused(
        &request(None, Some(101), None),
        "lab.synthetic_count",
        &["101", "`count`", "1 to 100"],
    );
    refused(
        &request(None, Some(0), None),
        "lab.synthetic_count",
        &["0", "`count`"],
    );
    // Any count a client can send is the same typed error, however large.
    let huge: Request = serde_json::from_str(r#"{"count": 18446744073709551615}"#).unwrap();
    refused(&huge, "lab.synthetic_count", &["18446744073709551615"]);
    assert_eq!(
        synthetic::generate(&request(None, Some(100), None))
            .unwrap()
            .samples
            .len(),
        100
    );
}

#[test]
fn a_subject_of_201_characters_is_rejected_whole_and_200_is_accepted() {
    let s201 = "s".repeat(201);
    refused(
        &request(Some(&s201), Some(1), None),
        "lab.synthetic_subject_too_long",
        &["201 characters", "200-character", "`subject_kind`"],
    );
    // Characters, not bytes (as JSON Schema's `maxLength` counts): 200 two-byte characters
    // are within the limit, 201 are not.
    refused(
        &request(Some(&"é".repeat(201)), Some(1), None),
        "lab.synthetic_subject_too_long",
        &["201 characters"],
    );
    synthetic::generate(&request(Some(&"é".repeat(200)), Some(1), None)).unwrap();
    let s200 = "s".repeat(200);
    synthetic::generate(&request(Some(&s200), Some(1), None)).unwrap();
}

#[test]
fn a_template_of_8193_characters_is_rejected_whole_and_8192_is_accepted() {
    let t8193 = "t".repeat(8193);
    refused(
        &request(None, Some(1), Some(&t8193)),
        "lab.synthetic_template_too_long",
        &["8193 characters", "8192-character", "`seed`"],
    );
    assert_eq!(
        synthetic::template_from_bytes(t8193.as_bytes())
            .unwrap_err()
            .code(),
        "lab.synthetic_template_too_long"
    );
    synthetic::generate(&request(None, Some(1), Some(&"t".repeat(8192)))).unwrap();
}

#[test]
fn an_input_over_8192_bytes_after_substitution_is_rejected_whole() {
    // An 8192-byte template (8176 literal bytes and `{{subject_kind}}`) with a 17-byte subject
    // gives 8193 bytes from the first sample on.
    let seed = format!("{}{{{{subject_kind}}}}", "x".repeat(8176));
    assert_eq!(seed.len(), 8192);
    let err = refused(
        &request(Some("seventeen-bytes!!"), Some(5), Some(&seed)),
        "lab.synthetic_input_too_long",
        &["sample 1", "8193 bytes", "8192-byte"],
    );
    assert_eq!(
        err,
        SyntheticError::InputTooLong {
            index: 1,
            bytes: 8193
        }
    );
    // At the limit exactly (a 16-byte subject), accepted.
    let batch =
        synthetic::generate(&request(Some("sixteen-bytes!!!"), Some(5), Some(&seed))).unwrap();
    assert_eq!(batch.samples[4].input.len(), 8192);
}

#[test]
fn a_batch_over_one_mib_once_json_escaped_is_rejected_whole() {
    // 100 inputs of 6000 quotes: 600,000 bytes raw, each quote escaped as `\"` in the request,
    // so over 1 MiB encoded though every input is within its 8192 bytes.
    let seed = "\"".repeat(6000);
    let err = refused(
        &request(None, Some(100), Some(&seed)),
        "lab.synthetic_batch_too_large",
        &["1048576-byte", "scenario create request"],
    );
    let SyntheticError::BatchTooLarge { bytes } = err else {
        panic!("{err:?}")
    };
    assert!(bytes > 1024 * 1024);
    // The same inputs without escaping fit.
    synthetic::generate(&request(None, Some(100), Some(&"q".repeat(6000)))).unwrap();
}

#[test]
fn the_batch_budget_leaves_room_for_the_largest_name_description_and_subject() {
    // A batch that fits: its steps plus the worst-case name, description and subject (every byte
    // escaped as \u00XX, 6 bytes per character) still encode within 1 MiB.
    let batch = synthetic::generate(&request(
        Some(&"s".repeat(200)),
        Some(100),
        Some(&"q".repeat(8000)),
    ))
    .unwrap();
    let worst = serde_json::json!({
        "name": "\u{1}".repeat(synthetic::MAX_NAME_CHARS),
        "description": "\u{1}".repeat(synthetic::MAX_DESCRIPTION_CHARS),
        "subject_kind": "\u{1}".repeat(synthetic::MAX_SUBJECT_CHARS),
        "steps": batch.steps(),
        "mocks": [],
    });
    let encoded = serde_json::to_vec(&worst).unwrap().len();
    assert!(
        encoded <= batch.request_bytes(),
        "{encoded} > {}",
        batch.request_bytes()
    );
    assert!(batch.request_bytes() <= synthetic::MAX_REQUEST_BYTES);
}

#[test]
fn a_request_with_an_unknown_field_is_refused() {
    let err = serde_json::from_str::<Request>(r#"{"count":2,"template":"x"}"#).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `template`"),
        "{err}"
    );
}
