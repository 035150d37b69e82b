//! The code catalog: unique, well-formed, documented codes, and every code the crate emits is
//! in it.

use std::collections::BTreeSet;

use corral_policy::codes::{self, CATALOG};
use corral_policy::scope::{CommandRefusal, PathRefusal, UrlRefusal};
use corral_policy::{Decision, PolicyError, Tier};

fn is_code_shaped(code: &str) -> bool {
    let Some((family, name)) = code.split_once('.') else {
        return false;
    };
    let family_ok = !family.is_empty() && family.bytes().all(|b| b.is_ascii_lowercase());
    let name_ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        && !name.starts_with('_')
        && !name.ends_with('_');
    family_ok && name_ok
}

#[test]
fn every_code_in_the_catalog_is_unique() {
    let mut seen = BTreeSet::new();
    for c in CATALOG {
        assert!(seen.insert(c.code), "`{}` appears twice", c.code);
    }
    assert_eq!(seen.len(), CATALOG.len());
}

#[test]
fn every_code_is_family_dot_name_with_a_title_a_fix_and_a_doc_id() {
    assert!(!CATALOG.is_empty());
    for c in CATALOG {
        assert!(is_code_shaped(c.code), "`{}` is not `family.name`", c.code);
        assert!(!c.title.trim().is_empty(), "`{}` has no title", c.code);
        assert!(!c.fix.trim().is_empty(), "`{}` has no fix", c.code);
        assert_eq!(codes::doc_id(c.code), format!("docs/errors.md#{}", c.code));
        assert_eq!(codes::lookup(c.code), Some(c));
    }
}

#[test]
fn the_code_shape_check_rejects_malformed_codes() {
    for bad in [
        "policy",
        "policy.",
        ".denied",
        "Policy.denied",
        "policy.denied.x",
        "policy.de-nied",
        "policy._x",
    ] {
        assert!(!is_code_shaped(bad), "{bad}");
    }
    assert!(is_code_shaped("policy.scope_required"));
}

#[test]
fn statuses_are_zero_for_offline_codes_and_http_errors_otherwise() {
    for c in CATALOG {
        let offline = c.code.starts_with("config.") || c.code.starts_with("lint.");
        if offline {
            assert_eq!(c.status, 0, "`{}` is offline-only", c.code);
        } else if c.code == codes::CONFIRMATION_REQUIRED || c.code == codes::AGENTS_INSTALLING {
            // The one non-error answer in the catalog: the call was accepted and waits for a
            // human's approval (202 Accepted), with the wire error's shape plus the action; and
            // an agent CLI being installed (202 + `Retry-After`: ask again).
            assert_eq!(c.status, 202, "`{}` is 202 Accepted", c.code);
        } else {
            assert!(
                (400..600).contains(&c.status),
                "`{}` has status {}",
                c.code,
                c.status
            );
        }
    }
}

#[test]
fn every_code_the_crate_can_emit_is_in_the_catalog() {
    let mut emitted: Vec<&str> = vec![
        PathRefusal::Invalid.code(),
        PathRefusal::OutsideRoots.code(),
        PathRefusal::Denied.code(),
        CommandRefusal::Shell.code(),
        CommandRefusal::Cwd.code(),
        CommandRefusal::Denied.code(),
        CommandRefusal::NotAllowed.code(),
        UrlRefusal::Invalid.code(),
        UrlRefusal::NotAllowed.code(),
        UrlRefusal::Private.code(),
        codes::POLICY_HOOK_DENIED,
        codes::POLICY_HOOK_FAILED,
        codes::POLICY_SCOPE_REQUIRED,
        codes::POLICY_READONLY,
        codes::POLICY_ARG_INVALID,
    ];
    if let Some(c) = Decision::NotMounted.code() {
        emitted.push(c);
    }
    if let Some(c) = (Decision::NotPermitted { candidates: vec![] }).code() {
        emitted.push(c);
    }
    let errors = [
        PolicyError::InvalidOpId {
            id: String::new(),
            why: String::new(),
        },
        PolicyError::UnknownOp {
            op: String::new(),
            suggestions: vec![],
        },
        PolicyError::InvalidSelector {
            selector: String::new(),
            why: String::new(),
            suggestions: vec![],
        },
        PolicyError::InvalidPrincipal {
            selector: String::new(),
        },
        PolicyError::ReservedNamespace {
            op: String::new(),
            namespace: String::new(),
        },
        PolicyError::DuplicateOp { op: String::new() },
        PolicyError::TierLowered {
            op: String::new(),
            derived: Tier::Confirm,
            asked: Tier::Read,
        },
        PolicyError::InvalidScope {
            what: String::new(),
            fix: "fix it".to_owned(),
        },
        PolicyError::InvalidUnit {
            kind: "size",
            value: String::new(),
        },
        PolicyError::InvalidUnit {
            kind: "duration",
            value: String::new(),
        },
        PolicyError::InvalidUnit {
            kind: "rate",
            value: String::new(),
        },
        PolicyError::UnsafeRequired {
            what: String::new(),
        },
        PolicyError::UnknownPreset {
            name: String::new(),
            suggestions: vec![],
        },
        PolicyError::PresetOption {
            preset: String::new(),
            option: String::new(),
        },
        PolicyError::UnknownAdapter {
            name: String::new(),
            suggestions: vec![],
        },
    ];
    for e in &errors {
        emitted.push(e.code());
        assert!(!e.fix().is_empty(), "{e:?} has no fix");
    }
    for code in emitted {
        assert!(
            codes::lookup(code).is_some(),
            "`{code}` is emitted but not in the catalog"
        );
    }
}

#[test]
fn the_status_of_a_code_is_the_catalogs_and_500_when_it_has_none() {
    for c in CATALOG {
        let expected = if c.status == 0 { 500 } else { c.status };
        assert_eq!(codes::status(c.code), expected, "`{}`", c.code);
    }
    assert_eq!(codes::status("no.such_code"), 500);
    assert_eq!(codes::status(codes::OP_NOT_ENABLED), 404);
}
