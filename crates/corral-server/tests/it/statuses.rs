//! A refusal's HTTP status is its code's in the catalog, whichever constructor built it: the
//! gateway's `Refusal`, an op's `OpError` and the server's `ApiError` take a code, never a
//! status, so the two cannot disagree.

use axum::response::IntoResponse;
use corral_guard::Refusal;
use corral_ops::OpError;
use corral_policy::codes::{self, CATALOG};
use corral_server::error::ApiError;

#[test]
fn every_code_of_the_catalog_answers_with_its_catalog_status_from_every_constructor() {
    let mut answered = 0;
    for c in CATALOG.iter().filter(|c| c.status != 0) {
        let refusal = Refusal::new(c.code, "why");
        assert_eq!(refusal.status(), c.status, "Refusal of `{}`", c.code);
        assert_eq!(refusal.kind(), c.code.split('.').next().unwrap_or(""));
        let op_error = OpError::new(c.code, "why");
        assert_eq!(op_error.status(), c.status, "OpError of `{}`", c.code);
        let api = ApiError::new(c.code, "why", Some("files.read"), "rid-1");
        assert_eq!(api.status(), c.status, "ApiError of `{}`", c.code);
        assert_eq!(api.body.code, c.code);
        let wire = api.into_response();
        assert_eq!(
            wire.status().as_u16(),
            c.status,
            "the wire status of `{}`",
            c.code
        );
        answered += 1;
    }
    // Every code that can reach a caller was walked (the offline ones are config and lint).
    assert_eq!(
        answered,
        CATALOG
            .iter()
            .filter(|c| !c.code.starts_with("config.") && !c.code.starts_with("lint."))
            .count()
    );
}

#[test]
fn a_code_with_no_http_status_answers_as_a_server_failure() {
    // An offline-only code (status 0) and a code the catalog does not know never pass for a
    // decision: they answer 500.
    for code in [codes::CONFIG_PARSE, codes::LINT_SHELL, "no.such_code"] {
        assert_eq!(Refusal::new(code, "why").status(), 500, "{code}");
        assert_eq!(OpError::new(code, "why").status(), 500, "{code}");
        let wire = ApiError::new(code, "why", None, "rid-2").into_response();
        assert_eq!(wire.status().as_u16(), 500, "{code}");
    }
}
